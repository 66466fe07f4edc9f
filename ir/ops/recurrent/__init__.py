"""Recurrent ops: RNN, GRU, LSTM (and QuantizedLSTM).

    cells      attributes, shape inference, activations and the cell math, written once over
               an arithmetic interface that numpy and the loop builder both implement
    reference  numpy evaluation (constant folding; the tests' second reference)
    lowering   the loop-IR lowering (input projection, then the step loop), and registration
    steps      the serial step loop, split over threads by blocks of hidden units
    quantized  QuantizedLSTM: onnxruntime's DynamicQuantizeLSTM, h quantized at every step
"""
