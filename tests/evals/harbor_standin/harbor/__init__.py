"""A stand-in for the parts of Harbor that ketch's adapter uses (Harbor needs Python >= 3.12
and is not on this machine's package index), with the signatures of the real ones.

Checked against Harbor's source, github.com/harbor-framework/harbor (formerly
laude-institute/harbor), as stored in the fork wrongbutworks/harbor at commit
7d91dbfaf1fcd569b9b04cd242c99239254ac516 (a merge of harbor-framework:main, 2026-08-22,
``harbor`` 0.22.0), files:

- src/harbor/agents/base.py: ``BaseAgent`` (``__init__``, ``name``, ``version``, ``setup``,
  ``run``, ``populate_context_post_run``, ``_get_env``, ``session_id``,
  ``environment_logs_dir``)
- src/harbor/agents/installed/base.py: ``BaseInstalledAgent`` (``__init__``, ``install``,
  ``setup``, ``exec_as_root``, ``exec_as_agent``, ``_exec``, ``get_version_command``,
  ``parse_version``, ``render_instruction``) and ``with_prompt_template``
- src/harbor/environments/base.py: ``BaseEnvironment.exec`` and ``ExecResult``
- src/harbor/models/agent/context.py: ``AgentContext``
- src/harbor/models/trial/paths.py: ``EnvironmentPaths.agent_dir`` (``/logs/agent``)
- src/harbor/models/trajectories/*.py: the ATIF models (``Trajectory`` ... ``FinalMetrics``)
- docs/content/docs/agents/index.mdx and README.md: how an installed agent is written and
  run (``harbor run -d terminal-bench@2.0 -a module:Class -m provider/model``)

Only the behaviour the adapter relies on is reproduced; nothing here is Harbor's code.
"""
