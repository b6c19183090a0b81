"""Agents through an OpenAI-compatible endpoint (env.name=agent:module:function).

A user's async agent program drives each episode through an OpenAI client: every chat
completion request it sends is one model turn, sampled by the generators exactly as a
native multi-turn episode's turns are (envs/runner.py). The pieces:

    controller/config.py        env.agent.*
    conversation.py  a session's messages -> the tokens they add (sampled ids kept verbatim)
    replies.py       a model turn -> the OpenAI chat.completion the agent gets back
    session.py       one episode's handoff between the endpoint and the runner
    endpoint.py      the HTTP server (one per process that plays episodes, loopback by default)
    environment.py   AgentEnvironment: the runner's view of an agent episode
"""
