"""Reductions and other folds along axes.

    semantics     ReduceSum ReduceMean ReduceMax ... : shape rules, numpy, registration
    axes          the `axes` attribute/input, noop_with_empty_axes, the reduced shape
    lowering      the reduction loop nests, and `Lanes` (multi-accumulator folds)
    runtime_axes  reductions whose axes input is only known at run time
    along_axis    Softmax, LogSoftmax, Hardmax, ArgMax, ArgMin
    cumulative    CumSum, CumProd
    topk          TopK
"""
