"""Annotations of a graded run (incident window, deploys, page, diagnosis), posted through grafana-client to
the documented-API stand-in; only after the grade, and only once the drill has ended."""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from grafana_api import FakeGrafana

from incidents import taxonomy
from sandbox.commands.grafana import annotate_after_drill
from sandbox.grafana.push import board_files
from services.stack.settings import SandboxConfig

FIXTURES = Path(__file__).parents[1] / "grading" / "fixtures"
RUN = "20261130-172507-ttft-after-deploy"  # t0 1796059507.753, injected at 91.5 s, deploy v2, paged
BOARD_UIDS = sorted(json.loads(p.read_text())["uid"] for p in board_files())
GRADED_AT = 1796059800.0


@pytest.fixture
def home(tmp_path):
    """A sandbox home holding the run's key, and the run directory (under runs/) with a counted grade."""
    home, runs = tmp_path / "home", tmp_path / "runs"
    (home / "keys").mkdir(parents=True)
    shutil.copy(FIXTURES / f"{RUN}.key", home / "keys" / f"{RUN}.key")
    shutil.copytree(FIXTURES / RUN, runs / RUN, ignore=shutil.ignore_patterns("prometheus", "golden"))
    return home, runs


def grade(run_dir: Path, score: int = 80, counted: bool = True, n: int = 1) -> None:
    out = run_dir / "diagnoses"
    out.mkdir(exist_ok=True)
    path = out / f"{n:02d}.grade.json"
    path.write_text(json.dumps({"run": run_dir.name, "score": score, "criteria": [], "counted": counted,
                                "time_to_diagnosis_s": 74.0}))
    os.utime(path, (GRADED_AT, GRADED_AT))


def annotate(fake, home, runs, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_GRAFANA_")}
    env.update(SANDBOX_HOME=str(home), SANDBOX_RUNS=str(runs))
    return subprocess.run([sys.executable, "-m", "sandbox.cli", "grafana", "annotate", RUN, "--url", fake.url,
                           "--token", "sa-token", *args], capture_output=True, text=True, env=env, timeout=60,
                          check=False)


def with_boards(fake: FakeGrafana) -> FakeGrafana:
    for uid in BOARD_UIDS:  # as `sandbox grafana push` left them
        fake.dashboards[uid] = {"id": len(fake.dashboards) + 1, "uid": uid, "version": 1}
    return fake


def test_a_graded_run_is_annotated_with_its_window_deploys_page_and_diagnosis(home):
    grade(home[1] / RUN, score=80)
    with with_boards(FakeGrafana()) as fake:
        result = annotate(fake, *home, "--json")
    assert result.returncode == 0, result.stderr
    assert fake.violations == []
    assert json.loads(result.stdout)["kinds"] == ["deploy", "diagnosis", "incident-window", "page"]
    for uid in BOARD_UIDS:
        notes = {n["tags"][-1]: n for n in fake.annotations if n["dashboardUID"] == uid}
        assert set(notes) == {"incident-window", "deploy", "page", "diagnosis"}
        window = notes["incident-window"]
        assert (window["time"], window["timeEnd"]) == (round((1796059507.7531118 + 91.5) * 1000), GRADED_AT * 1000)
        assert (notes["deploy"]["time"], notes["deploy"]["text"]) == (1796059667638, "deploy: version v2")
        assert (notes["page"]["time"], notes["page"]["text"]) == (1796059667657, "page: TimeToFirstTokenHigh")
        assert notes["diagnosis"]["time"] == GRADED_AT * 1000 and notes["diagnosis"]["timeEnd"] is None
        assert notes["diagnosis"]["text"] == "diagnosis graded: 80/100, 74s after the page"
        assert all(n["tags"][:2] == ["sandbox", f"run:{RUN}"] for n in notes.values())


def test_no_annotation_names_the_cause(home):
    grade(home[1] / RUN)
    with with_boards(FakeGrafana()) as fake:
        assert annotate(fake, *home).returncode == 0
    words = {t.id for t in taxonomy.ROOT_CAUSES} | {t.id.replace("-", " ") for t in taxonomy.ROOT_CAUSES}
    words |= {"prefix cach", "inject", "fault", "variant"}
    text = " ".join([n["text"] + " " + " ".join(n["tags"]) for n in fake.annotations]).lower()
    assert fake.annotations and not [w for w in words if w in text]


def test_an_ungraded_run_gets_no_annotation(home):
    grade(home[1] / RUN, counted=False)  # a submission recorded but not counted is no grade
    with with_boards(FakeGrafana()) as fake:
        result = annotate(fake, *home)
    assert result.returncode == 2 and "has not been graded" in result.stderr
    assert fake.requests == []


def test_annotations_wait_until_the_drill_has_ended(home, monkeypatch):
    home_dir, runs = home
    grade(runs / RUN)
    drill = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    with with_boards(FakeGrafana()) as fake:
        monkeypatch.setenv("SANDBOX_GRAFANA_URL", fake.url)
        monkeypatch.setenv("SANDBOX_GRAFANA_TOKEN", "sa-token")
        cfg = SandboxConfig(home=home_dir, runs=runs)
        worker = threading.Thread(target=annotate_after_drill, args=(cfg, runs / RUN, drill.pid, GRADED_AT))
        worker.start()
        try:
            time.sleep(1.5)  # the drill still runs: nothing may reach Grafana yet
            assert fake.requests == []
        finally:
            drill.stdin.close()  # the "drill" ends
            drill.wait(10)
        worker.join(30)
        assert not worker.is_alive()
    assert len(fake.annotations) == 4 * len(BOARD_UIDS) and fake.violations == []


def test_without_a_configured_grafana_nothing_is_sent(home, monkeypatch):
    monkeypatch.delenv("SANDBOX_GRAFANA_URL", raising=False)
    grade(home[1] / RUN)
    with with_boards(FakeGrafana()) as fake:
        annotate_after_drill(SandboxConfig(home=home[0], runs=home[1]), home[1] / RUN, os.getpid(), GRADED_AT, 0.1)
    assert fake.requests == []


@pytest.mark.skipif(not os.environ.get("SANDBOX_TEST_GRAFANA_URL"),
                    reason="no real Grafana named (SANDBOX_TEST_GRAFANA_URL, e.g. the compose one: http://127.0.0.1:3000)")
def test_a_real_grafana_shows_the_annotations_of_a_graded_run(home):
    """Against a real Grafana with the dashboards in it (compose provisions them; else `sandbox grafana push`)."""
    import requests

    url = os.environ["SANDBOX_TEST_GRAFANA_URL"].rstrip("/")
    auth = (os.environ.get("SANDBOX_TEST_GRAFANA_USER", "admin"), os.environ.get("SANDBOX_TEST_GRAFANA_PASSWORD", "admin"))
    grade(home[1] / RUN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_GRAFANA_")}
    env.update(SANDBOX_HOME=str(home[0]), SANDBOX_RUNS=str(home[1]))
    result = subprocess.run([sys.executable, "-m", "sandbox.cli", "grafana", "annotate", RUN, "--url", url,
                             "--user", auth[0], "--password", auth[1]], capture_output=True, text=True, env=env,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    for uid in BOARD_UIDS:  # the `tags` filter of GET /api/annotations reads organization annotations only
        found = requests.get(f"{url}/api/annotations", params={"dashboardUID": uid, "limit": 1000}, auth=auth,
                             timeout=10).json()
        kinds = {a["tags"][-1] for a in found if f"run:{RUN}" in a.get("tags", [])}
        assert kinds == {"incident-window", "deploy", "page", "diagnosis"}, uid
