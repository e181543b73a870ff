from graphfed.cli import main

main()
