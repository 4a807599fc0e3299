"""Mitigation: the remediations of the taxonomy as real operations on the running stack.

One function per action (`actions.py`), each refusing bad input before it changes anything; the CLI
(`sandbox mitigate`) and any other caller (a drill's oracle, a game day's script, an agent) drive the same
functions. What a setting change restores is data (`settings.py`); what a rollback goes back to is the run's
own deploy history (`history.py`).
"""
