"""The agent: a mini-swe-agent-compatible loop over any `Engine`, its prompts and action parser, token-faithful
transcripts and the scripted expert. Running many episodes of it is `codedojo.rollout`."""
