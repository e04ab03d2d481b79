"""The op's model: its rules and messages, shapes, tiling, options, tile suggestion and
explanation, the memory guard and the Inf/NaN-weight rule. Imports no backend."""
