"""Kernels of the control-flow ops. The executor runs loops and branches; these kernels are the primitives
it schedules.

    dataflow    Switch, Merge, Enter, Exit, NextIteration, LoopCond, ControlTrigger (v1 control flow)
    functional  If, While and function calls over the graph's FunctionDefLibrary (v2 control flow)
"""
