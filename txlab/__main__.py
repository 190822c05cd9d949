from txlab.cli import main

main()
