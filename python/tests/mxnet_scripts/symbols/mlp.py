"""A three-layer perceptron, built as MXNet's image-classification symbols are."""
import mxnet as mx


def get_symbol(num_classes=10, **kwargs):
    net = mx.symbol.Flatten(data=mx.symbol.Variable('data'))
    for i, width in enumerate((128, 64)):
        net = mx.symbol.FullyConnected(data=net, name='fc%d' % (i + 1), num_hidden=width)
        net = mx.symbol.Activation(data=net, name='relu%d' % (i + 1), act_type='relu')
    net = mx.symbol.FullyConnected(data=net, name='fc3', num_hidden=num_classes)
    return mx.symbol.SoftmaxOutput(data=net, name='softmax')
