from inferplex.cli.main import main

main()
