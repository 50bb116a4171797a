"""One module per subcommand: each takes the resolved options and returns an exit code.

Must not hold logic that another command could need: that belongs in a job package below.
"""
