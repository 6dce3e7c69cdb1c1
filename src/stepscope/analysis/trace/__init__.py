"""The trace viewer's index of a host's events, its coarse overview and cached preview."""
