"""The agent process, one per machine, user and environment, and what a logger shares with it (rltrack.agent.link)."""
