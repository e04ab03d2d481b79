"""Golden data and accuracy judgement: the float64 reference (``reference``), golden cases
(``case``), CANN's accuracy standards (``accuracy``), error localisation (``localise``) and its
picture (``heatmap``), one judgement of a result (``judge``, with ``arguments``: the public
compare's arguments checked), msprobe's accuracy columns (``msprobe_metrics``), judged calls as
table rows (``calls``), the case folder's files (``files``) and msprobe dumps (``msprobe/``).
Used by ``pypto.testing``, ``pypto.torch`` and the CLI; nothing here imports
``pypto.testing``."""
