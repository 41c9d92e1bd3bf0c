"""Residual networks (He et al., "Identity Mappings in Deep Residual
Networks"), built as MXNet's image-classification symbols are: pre-activation
units, BatchNorm before each convolution, an identity (or Cast) on the data,
global average pooling. For inputs of 28 to 32 pixels: three stages."""
import numpy as np

import mxnet as mx


def residual_unit(data, num_filter, stride, dim_match, name, bottle_neck=True, bn_mom=0.9,
                  workspace=256):
    def bn_relu(x, suffix):
        x = mx.sym.BatchNorm(data=x, fix_gamma=False, eps=2e-5, momentum=bn_mom,
                             name=name + '_bn' + suffix)
        return mx.sym.Activation(data=x, act_type='relu', name=name + '_relu' + suffix)

    def conv(x, filters, kernel, step, pad, suffix):
        return mx.sym.Convolution(data=x, num_filter=filters, kernel=kernel, stride=step,
                                  pad=pad, no_bias=True, workspace=workspace,
                                  name=name + '_conv' + suffix)

    act1 = bn_relu(data, '1')
    if bottle_neck:
        body = conv(act1, int(num_filter * 0.25), (1, 1), (1, 1), (0, 0), '1')
        body = conv(bn_relu(body, '2'), int(num_filter * 0.25), (3, 3), stride, (1, 1), '2')
        body = conv(bn_relu(body, '3'), num_filter, (1, 1), (1, 1), (0, 0), '3')
    else:
        body = conv(act1, num_filter, (3, 3), stride, (1, 1), '1')
        body = conv(bn_relu(body, '2'), num_filter, (3, 3), (1, 1), (1, 1), '2')
    shortcut = data if dim_match else conv(act1, num_filter, (1, 1), stride, (0, 0), 'sc')
    return body + shortcut


def resnet(units, num_stages, filter_list, num_classes, image_shape, bottle_neck=True,
           bn_mom=0.9, workspace=256, dtype='float32'):
    data = mx.sym.Variable(name='data')
    if dtype == 'float32':
        data = mx.sym.identity(data=data, name='id')
    elif dtype == 'float16':
        data = mx.sym.Cast(data=data, dtype=np.float16)
    data = mx.sym.BatchNorm(data=data, fix_gamma=True, eps=2e-5, momentum=bn_mom,
                            name='bn_data')
    body = mx.sym.Convolution(data=data, num_filter=filter_list[0], kernel=(3, 3),
                              stride=(1, 1), pad=(1, 1), no_bias=True, name="conv0",
                              workspace=workspace)
    for i in range(num_stages):
        stride = (1, 1) if i == 0 else (2, 2)
        body = residual_unit(body, filter_list[i + 1], stride, False,
                             name='stage%d_unit%d' % (i + 1, 1), bottle_neck=bottle_neck,
                             bn_mom=bn_mom, workspace=workspace)
        for j in range(units[i] - 1):
            body = residual_unit(body, filter_list[i + 1], (1, 1), True,
                                 name='stage%d_unit%d' % (i + 1, j + 2),
                                 bottle_neck=bottle_neck, bn_mom=bn_mom, workspace=workspace)
    body = mx.sym.BatchNorm(data=body, fix_gamma=False, eps=2e-5, momentum=bn_mom, name='bn1')
    body = mx.sym.Activation(data=body, act_type='relu', name='relu1')
    body = mx.sym.Pooling(data=body, global_pool=True, kernel=(7, 7), pool_type='avg',
                          name='pool1')
    body = mx.sym.FullyConnected(data=mx.sym.Flatten(data=body), num_hidden=num_classes,
                                 name='fc1')
    if dtype == 'float16':
        body = mx.sym.Cast(data=body, dtype=np.float32)
    return mx.sym.SoftmaxOutput(data=body, name='softmax')


def get_symbol(num_classes, num_layers, image_shape, conv_workspace=256, dtype='float32',
               **kwargs):
    image_shape = [int(l) for l in image_shape.split(',')]
    if image_shape[1] > 32:
        raise ValueError("this example builds the small-image ResNets only")
    if (num_layers - 2) % 9 == 0 and num_layers >= 164:
        per_unit, filter_list, bottle_neck = (num_layers - 2) // 9, [16, 64, 128, 256], True
    elif (num_layers - 2) % 6 == 0 and num_layers < 164:
        per_unit, filter_list, bottle_neck = (num_layers - 2) // 6, [16, 16, 32, 64], False
    else:
        raise ValueError("no experiments done on num_layers %d" % num_layers)
    return resnet(units=[per_unit] * 3, num_stages=3, filter_list=filter_list,
                  num_classes=num_classes, image_shape=image_shape, bottle_neck=bottle_neck,
                  workspace=conv_workspace, dtype=dtype)
