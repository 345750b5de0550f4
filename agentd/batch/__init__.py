"""Evaluation runs: every task of a file as an isolated sample of one batch root
(``runner``), its I/O recorded or replayed (``broker``, ``cassette``), scored
(``score``), its trajectory written (``trajectories``), its results kept
(``files``) and shown (``progress`` on a terminal, ``report`` as one page).
Imported only by the CLI."""
