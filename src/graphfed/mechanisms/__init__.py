"""Pure tensor and number mechanisms the algorithms share: no Message, no Server, no state.

Each function is one equation of a paper (cited in its docstring), unit-testable on its own.
"""
