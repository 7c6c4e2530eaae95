"""statekeep behind other agent frameworks, one module each, each behind an extra:

- :mod:`statekeep.adapters.langgraph`: ``StatekeepSaver``, a LangGraph checkpointer
  (``pip install 'statekeep[langgraph]'``);
- :mod:`statekeep.adapters.openai_agents`: ``StatekeepSession``, an OpenAI Agents session
  (``pip install 'statekeep[openai-agents]'``);
- :mod:`statekeep.adapters.alpineagents`: ``StatekeepStore``, an alpineagents store
  (``pip install 'statekeep[alpineagents]'``);
- :mod:`statekeep.adapters.adk`: ``StatekeepSessionService``, a Google ADK session service
  (``pip install 'statekeep[adk]'``).

Importing this package imports no framework; each module imports its own, and without it
raises ModuleNotFoundError naming the extra to install. Given a store in its ``default``
namespace, each adapter keeps its States in a namespace named after its framework
(``langgraph``, ``openai-agents``, ``alpineagents``, ``adk``; see :mod:`._home`).
"""
