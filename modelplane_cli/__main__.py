from modelplane_cli.main import main

main()
