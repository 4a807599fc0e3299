"""A local stand-in for Grafana's HTTP API (the legacy /api/* endpoints the sandbox calls), on loopback.

Grafana itself cannot run here, so each request is checked against Grafana's documented API
(Dashboard, Folder, Data source, Annotations and Health HTTP APIs): the method and path, the auth
header (a Bearer token or basic auth; /api/health needs none), a JSON content type, and the body's
fields and types. What the documentation does not allow is answered 400 and recorded in
`violations`, so a test can assert that the client spoke the API as documented. State (datasources,
folders, dashboards, annotations) is kept, so upserts behave as Grafana's do: 404 before a
create, 409 on a duplicate, 412 when a dashboard uid exists and `overwrite` is false.
"""
from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

UID = re.compile(r"^[a-zA-Z0-9\-_]{1,40}$")  # Grafana: at most 40 characters, URL-safe
DASHBOARD_BODY = {"dashboard", "folderId", "folderUid", "message", "overwrite"}
ANNOTATION_BODY = {"dashboardUID", "dashboardId", "panelId", "time", "timeEnd", "tags", "text", "data"}
DATASOURCE_BODY = {"uid", "name", "type", "access", "url", "user", "database", "basicAuth", "basicAuthUser",
                   "withCredentials", "isDefault", "jsonData", "secureJsonData", "version"}
FOLDER_BODY = {"uid", "title", "description", "parentUid"}


class BadRequest(Exception):
    pass


class FakeGrafana:
    def __init__(self, token: str | None = "sa-token", user: str | None = None, password: str | None = None):
        self.token, self.user, self.password = token, user, password
        self.requests: list[tuple[str, str, dict | None]] = []  # (method, path, body)
        self.violations: list[str] = []
        self.datasources: dict[str, dict] = {}
        self.folders: dict[str, dict] = {}
        self.dashboards: dict[str, dict] = {}
        self.annotations: list[dict] = []
        self._ids = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGrafana:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    # -- auth ---------------------------------------------------------------------------
    def authorized(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        if scheme == "Bearer":
            return self.token is not None and value == self.token
        if scheme == "Basic" and self.user is not None:
            return base64.b64decode(value).decode() == f"{self.user}:{self.password}"
        return False

    # -- routes -------------------------------------------------------------------------
    def route(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        if method == "GET" and path == "/api/health":
            return 200, {"commit": "0000000", "database": "ok", "version": "11.3.0"}
        m = re.fullmatch(r"/api/datasources/uid/([^/]+)", path)
        if m and method == "GET":
            ds = self.datasources.get(m.group(1))
            return (200, ds) if ds else (404, {"message": "Data source not found"})
        if m and method == "PUT":
            return self.update_datasource(m.group(1), body)
        if path == "/api/datasources" and method == "POST":
            return self.create_datasource(body)
        m = re.fullmatch(r"/api/folders/([^/]+)", path)
        if m and method == "GET":
            f = self.folders.get(m.group(1))
            return (200, f) if f else (404, {"message": "folder not found", "status": "not-found"})
        if path == "/api/folders" and method == "POST":
            return self.create_folder(body)
        if path == "/api/dashboards/db" and method == "POST":
            return self.save_dashboard(body)
        if path == "/api/annotations" and method == "POST":
            return self.add_annotation(body)
        raise BadRequest(f"{method} {path} is not an endpoint the sandbox should call")

    def _fields(self, body: dict | None, allowed: set[str], required: tuple[str, ...], what: str) -> dict:
        if not isinstance(body, dict):
            raise BadRequest(f"{what}: the body must be a JSON object")
        if unknown := set(body) - allowed:
            raise BadRequest(f"{what}: fields Grafana does not document: {sorted(unknown)}")
        if missing := [k for k in required if body.get(k) in (None, "")]:
            raise BadRequest(f"{what}: missing {missing}")
        return body

    def _datasource(self, body: dict | None, what: str) -> dict:
        body = self._fields(body, DATASOURCE_BODY, ("name", "type", "access"), what)
        if body["access"] not in ("proxy", "direct"):
            raise BadRequest(f"{what}: access must be proxy or direct, got {body['access']!r}")
        if "uid" in body and not UID.match(str(body["uid"])):
            raise BadRequest(f"{what}: bad uid {body['uid']!r}")
        if not isinstance(body.get("jsonData", {}), dict):
            raise BadRequest(f"{what}: jsonData must be an object")
        return body

    def create_datasource(self, body):
        body = self._datasource(body, "POST /api/datasources")
        if any(d["name"] == body["name"] for d in self.datasources.values()):
            return 409, {"message": "data source with the same name already exists"}
        ds = {**body, "id": self.next_id(), "uid": body.get("uid") or f"ds{self._ids}", "orgId": 1, "readOnly": False}
        self.datasources[ds["uid"]] = ds
        return 200, {"datasource": ds, "id": ds["id"], "message": "Datasource added", "name": ds["name"]}

    def update_datasource(self, uid, body):
        body = self._datasource(body, f"PUT /api/datasources/uid/{uid}")
        ds = self.datasources.get(uid)
        if ds is None:
            return 404, {"message": "Data source not found"}
        if ds.get("readOnly"):
            return 403, {"message": "Cannot update read-only data source"}
        ds.update(body)
        return 200, {"datasource": ds, "id": ds["id"], "message": "Datasource updated", "name": ds["name"]}

    def create_folder(self, body):
        body = self._fields(body, FOLDER_BODY, ("title",), "POST /api/folders")
        uid = body.get("uid") or f"f{self.next_id()}"
        if not UID.match(uid):
            raise BadRequest(f"POST /api/folders: bad uid {uid!r}")
        if uid in self.folders:
            return 409, {"message": "a folder with the same uid already exists"}
        folder = {"id": self.next_id(), "uid": uid, "title": body["title"], "url": f"/dashboards/f/{uid}/",
                  "version": 1}
        self.folders[uid] = folder
        return 200, folder

    def save_dashboard(self, body):
        body = self._fields(body, DASHBOARD_BODY, ("dashboard",), "POST /api/dashboards/db")
        board = body["dashboard"]
        if not isinstance(board, dict) or not board.get("title") or not UID.match(str(board.get("uid", ""))):
            raise BadRequest("POST /api/dashboards/db: dashboard needs a title and a uid of at most 40 characters")
        if "folderId" in body and "folderUid" in body:
            raise BadRequest("POST /api/dashboards/db: give folderId or folderUid, not both")
        if body.get("folderUid") and body["folderUid"] not in self.folders:
            return 400, {"message": "folder not found"}
        old = self.dashboards.get(board["uid"])
        if board.get("id") is not None and (old is None or old["id"] != board["id"]):
            return 404, {"message": "Dashboard not found", "status": "not-found"}
        if old is not None and not body.get("overwrite"):
            return 412, {"message": "A dashboard with the same uid already exists", "status": "name-exists"}
        version = old["version"] + 1 if old else 1
        slug = re.sub(r"[^a-z0-9]+", "-", board["title"].lower()).strip("-")
        saved = {"id": old["id"] if old else self.next_id(), "uid": board["uid"], "version": version,
                 "folderUid": body.get("folderUid"), "dashboard": board}
        self.dashboards[board["uid"]] = saved
        return 200, {"id": saved["id"], "uid": board["uid"], "url": f"/d/{board['uid']}/{slug}",
                     "status": "success", "version": version, "slug": slug}

    def add_annotation(self, body):
        body = self._fields(body, ANNOTATION_BODY, ("text",), "POST /api/annotations")
        for key in ("time", "timeEnd", "panelId", "dashboardId"):  # Go decodes null as 0; a string is an error
            if body.get(key) is not None and not isinstance(body[key], int):
                raise BadRequest(f"POST /api/annotations: {key} must be an integer (epoch ms for times)")
        if not isinstance(body.get("tags", []), list) or not all(isinstance(t, str) for t in body.get("tags", [])):
            raise BadRequest("POST /api/annotations: tags must be a list of strings")
        if body.get("timeEnd") and body["timeEnd"] < (body.get("time") or 0):
            raise BadRequest("POST /api/annotations: timeEnd before time")
        if body.get("dashboardUID") and body["dashboardUID"] not in self.dashboards:
            return 404, {"message": "Dashboard not found"}
        note = {**body, "id": self.next_id()}
        self.annotations.append(note)
        return 200, {"message": "Annotation added", "id": note["id"]}

    # -- HTTP -----------------------------------------------------------------------------
    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet test output
                pass

            def _serve(self, method: str) -> None:
                path = self.path.split("?", 1)[0]
                body = None
                length = int(self.headers.get("Content-Length") or 0)
                with fake._lock:
                    try:
                        if length:
                            if not self.headers.get("Content-Type", "").startswith("application/json"):
                                raise BadRequest(f"{method} {path}: a JSON body needs Content-Type: application/json")
                            body = json.loads(self.rfile.read(length))
                        fake.requests.append((method, path, body))
                        if path != "/api/health" and not fake.authorized(self.headers.get("Authorization")):
                            status, reply = 401, {"message": "Unauthorized"}
                        else:
                            status, reply = fake.route(method, path, body)
                    except (BadRequest, ValueError) as e:
                        fake.violations.append(str(e))
                        status, reply = 400, {"message": str(e)}
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def do_PUT(self):
                self._serve("PUT")

            def do_DELETE(self):
                self._serve("DELETE")

        return Handler
