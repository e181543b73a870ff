"""``graphfed sweep``: an equal-budget hyper-parameter search per method on Optuna, selected on
the validation split, the winner re-run over seeds and reported once on test.

``space`` declares what is searched (a registry-wide space for the keys every method shares,
plus the ranges an algorithm declares on its own option fields), ``objective`` scores a trial's
run from its validation numbers only, ``study`` keeps each method's Optuna study (resumable,
one trial per budget slot), ``report`` writes the table and the winning configs, and
``runner`` ties them together. A trial is a function of its config alone (trained through
``reproduce``'s cell runner), so trials can run anywhere a config can. ``preset`` names a
protocol swept on several datasets with every registered method that can run it
(``fgl-standard``), and ``leaderboard`` renders finished sweeps as one ranked docs page.
"""
