"""The command line (`workbench ...`) and the `%wb` magic."""
