"""LeNet (LeCun et al. 1998) with tanh units, built as MXNet's
image-classification symbols are (cuDNN attributes included)."""
import mxnet as mx


def get_symbol(num_classes=10, add_stn=False, **kwargs):
    data = mx.symbol.Variable('data')
    if add_stn:
        data = mx.sym.SpatialTransformer(data=data, transform_type="affine",
                                         sampler_type="bilinear", target_shape=(28, 28))
    net = data
    for i, filters in enumerate((20, 50)):
        net = mx.symbol.Convolution(data=net, kernel=(5, 5), num_filter=filters,
                                    workspace=512, cudnn_tune='fastest')
        net = mx.symbol.Activation(data=net, act_type="tanh")
        net = mx.symbol.Pooling(data=net, pool_type="max", kernel=(2, 2), stride=(2, 2))
    net = mx.symbol.Flatten(data=net)
    net = mx.symbol.FullyConnected(data=net, num_hidden=500)
    net = mx.symbol.Activation(data=net, act_type="tanh")
    net = mx.symbol.FullyConnected(data=net, num_hidden=num_classes)
    return mx.symbol.SoftmaxOutput(data=net, name='softmax')
