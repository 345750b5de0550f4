"""The command line: click flags turned into one validated, frozen config
(``flags``) for the run (``main``) and its subcommands (``batch``, ``acp``,
``auth``, ``top``). Nothing imports it but ``agentd.__main__``."""
