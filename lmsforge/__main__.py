from lmsforge.cli import run

run()
