"""The canary judge: pure statistics, no Django, no database, no clock of its own.

verdict (judge(): every check of a candidate, one decision), checks (the error-rate e-process),
llm_checks, guardrails, gr_guardrails, p99_guardrail, paired (the latency rank tests), eprocess,
outage, evidence (ArmWindow, JudgeConfig, the check record and the breach memory), statistics,
windows (stored samples into ArmWindows) and forecast. The bottom of monitoring's layers: it
imports nothing else of monitoring (pyproject.toml, contract monitoring-layers)."""
