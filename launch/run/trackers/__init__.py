"""One module per experiment tracker behind ``launch.run.tracking.Tracker`` (imported only when asked for)."""
