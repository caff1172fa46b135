from toolloop_cli.cli import main

main()
