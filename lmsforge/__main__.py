from lmsforge.cli import main

main()
