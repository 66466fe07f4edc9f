"""Elementwise ops: each a `scalar` rule on loop-IR operands, fused into one loop nest.

    arithmetic   Add Sub Mul Div Pow Mod Max Min Sum Mean Clip Abs Neg Reciprocal Sign; the dtype
                 tables and `unary`/`binary` helpers every elementwise family registers with
    inference    broadcast shape inference and dtype checks shared by every family
    unary_math   Exp Log Sqrt Floor Ceil Round Erf Sigmoid Tanh, hyperbolic functions
    trig         Sin Cos Tan Asin Acos Atan
    logic        comparisons, Not/And/Or/Xor, Where, IsNaN/IsInf, bitwise ops
    cast         Cast, CastLike
    activation   Relu LeakyRelu PRelu Gelu Elu Selu ... Mish Swish SwiGLU
    bitcast      BitCast (evaluated in numpy)
"""
