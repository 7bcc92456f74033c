from copyprof.cli import main

main()
