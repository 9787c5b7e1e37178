"""Telling the world (issue 32, docs/telling.md): pings (healthchecks.io's
protocol), webhooks and mail, delivered from the outbox after the commit
of the transition that caused them (backends: contract.Outbox).

``sender.py`` leases due messages and delivers them off the event loop;
``messages.py`` makes each one's request (pure); ``http.py`` and
``mail.py`` speak to the outside with the standard library only (no
dependency to audit or keep; the daily commands never import this
package: tests/acceptance/test_fast_cli.py). ``deadman.py`` is the
schedules' dead-man switch.
"""
