"""The serving stack's control layer: bring Ray, the Serve app, Prometheus and the compose cluster up
and down, deploy to Serve and read it back, read Prometheus and its alerts, keep the stack's state.

It is the layer every product part stands on (`faults`, `incidents`, `sandbox`), so it imports only
`services` (and itself): never `faults`, `incidents` or `sandbox`.
"""
