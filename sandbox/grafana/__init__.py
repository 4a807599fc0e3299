"""Grafana, from the sandbox's side: push the dashboards and the datasource, annotate a graded run.

Grafana is the candidate's instrument panel; the dashboards are provisioned from files in a compose
deployment, and `sandbox grafana push` uploads the same JSON to any Grafana a user already runs.
Annotations (incident window, deploys, diagnosis time) are written only after a drill is graded.
"""
