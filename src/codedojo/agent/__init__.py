"""The agent: a mini-swe-agent-compatible loop over any `Engine`, token-faithful trajectories, the
rollout scheduler and evaluation."""
