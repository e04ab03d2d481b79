"""Golden data and accuracy judgement: the float64 reference (``reference``), golden cases
(``case``), CANN's accuracy standards (``accuracy``), error localisation (``localise``) and
the case folder's files (``files``). Used by ``pypto.testing`` and the CLI."""
