from sloth_daemon.cli import main

main()
