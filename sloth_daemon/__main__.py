from sloth_daemon.cli import run

run()
