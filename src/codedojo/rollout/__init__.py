"""Episodes of the agent in sandboxes, many at once: the rollout scheduler and its typed `Episode` record
(`episodes`), evaluation with pass@k and paired differences (`evaluation`) and `codedojo eval` (`cli`).
The agent itself (one episode's loop over an engine) is `codedojo.agent`; a trial (sandbox, agent, verifier)
is `codedojo.trial`."""
