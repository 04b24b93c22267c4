"""`runner bench`: loader variants measured in fresh processes, reported as tables and charts."""
