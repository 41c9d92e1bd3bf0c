"""The training driver of MXNet's image-classification examples, in kvtrain's
own words: the same flags and the same mx calls, in the same order."""
import logging
import math
import os
import re
import time

import mxnet as mx


def get_epoch_size(args, kv):
    # Batches each machine runs per epoch: its share of the examples.
    return math.ceil(int(args.num_examples / kv.num_workers) / args.batch_size)


def _get_lr_scheduler(args, kv):
    if 'lr_factor' not in args or args.lr_factor >= 1:
        return args.lr, None
    epoch_size = get_epoch_size(args, kv)
    begin_epoch = args.load_epoch or 0
    if 'pow' in args.lr_step_epochs:
        power = float(re.sub('pow[- ]*', '', args.lr_step_epochs))
        return args.lr, mx.lr_scheduler.PolyScheduler(args.num_epochs * epoch_size, args.lr,
                                                      power)
    step_epochs = [int(e) for e in args.lr_step_epochs.split(',')]
    lr = args.lr
    for e in step_epochs:
        if begin_epoch >= e:
            lr *= args.lr_factor
    if lr != args.lr:
        logging.info('Adjust learning rate to %e for epoch %d', lr, begin_epoch)
    steps = [epoch_size * (e - begin_epoch) for e in step_epochs if e > begin_epoch]
    if not steps:
        return lr, None
    return lr, mx.lr_scheduler.MultiFactorScheduler(step=steps, factor=args.lr_factor,
                                                    base_lr=args.lr)


def _load_model(args, rank=0):
    if 'load_epoch' not in args or args.load_epoch is None:
        return None, None, None
    prefix = args.model_prefix
    if rank > 0 and os.path.exists("%s-%d-symbol.json" % (prefix, rank)):
        prefix += "-%d" % rank
    sym, arg_params, aux_params = mx.model.load_checkpoint(prefix, args.load_epoch)
    logging.info('Loaded model %s_%04d.params', prefix, args.load_epoch)
    return sym, arg_params, aux_params


def _save_model(args, rank=0):
    if args.model_prefix is None:
        return None
    return mx.callback.do_checkpoint(
        args.model_prefix if rank == 0 else "%s-%d" % (args.model_prefix, rank),
        period=args.save_period)


def add_fit_args(parser):
    t = parser.add_argument_group('Training', 'model training')
    t.add_argument('--network', type=str, help='the network to use')
    t.add_argument('--num-layers', type=int, help='layers, for networks that have a depth')
    t.add_argument('--gpus', type=str, help='GPUs to run on, e.g. 0 or 0,2,5; none: the CPU')
    t.add_argument('--kv-store', type=str, default='device', help='key-value store type')
    t.add_argument('--num-epochs', type=int, default=100, help='epochs to train')
    t.add_argument('--lr', type=float, default=0.1, help='initial learning rate')
    t.add_argument('--lr-factor', type=float, default=0.1, help='rate multiplier per step')
    t.add_argument('--lr-step-epochs', type=str, help='epochs at which the rate drops')
    t.add_argument('--initializer', type=str, default='default', help='initializer')
    t.add_argument('--optimizer', type=str, default='sgd', help='optimizer')
    t.add_argument('--mom', type=float, default=0.9, help='momentum')
    t.add_argument('--wd', type=float, default=0.0001, help='weight decay')
    t.add_argument('--batch-size', type=int, default=128, help='batch size')
    t.add_argument('--disp-batches', type=int, default=20, help='log every n batches')
    t.add_argument('--model-prefix', type=str, help='checkpoint prefix')
    t.add_argument('--save-period', type=int, default=1, help='epochs between checkpoints')
    parser.add_argument('--monitor', dest='monitor', type=int, default=0,
                        help='log every array every n batches')
    t.add_argument('--load-epoch', type=int, help='resume from this checkpoint')
    t.add_argument('--top-k', type=int, default=0, help='also report top-k accuracy')
    t.add_argument('--loss', type=str, default='', help='also report ce and/or nll_loss')
    t.add_argument('--test-io', type=int, default=0, help='1: only read the data')
    t.add_argument('--dtype', type=str, default='float32', help='float32 or float16')
    t.add_argument('--gc-type', type=str, default='none', help='gradient compression')
    t.add_argument('--gc-threshold', type=float, default=0.5, help='2bit threshold')
    t.add_argument('--macrobatch-size', type=int, default=0, help='large-batch sgd')
    t.add_argument('--warmup-epochs', type=int, default=5, help='large-batch warm-up')
    t.add_argument('--warmup-strategy', type=str, default='linear', help='warm-up shape')
    t.add_argument('--profile-worker-suffix', type=str, default='', help='worker profile')
    t.add_argument('--profile-server-suffix', type=str, default='', help='server profile')
    t.add_argument('--use-imagenet-data-augmentation', type=int, default=0, help='augment')
    return t


def fit(args, network, data_loader, **kwargs):
    kv = mx.kvstore.create(args.kv_store)
    if args.gc_type != 'none':
        kv.set_gradient_compression({'type': args.gc_type, 'threshold': args.gc_threshold})
    if args.profile_server_suffix or args.profile_worker_suffix:
        mx.profiler.set_config(filename=args.profile_worker_suffix, profile_all=True)

    head = '%(asctime)-15s Node[' + str(kv.rank) + '] %(message)s'
    logging.basicConfig(level=logging.DEBUG, format=head)
    logging.info('start with arguments %s', args)

    epoch_size = get_epoch_size(args, kv)
    train, val = data_loader(args, kv)
    if 'dist' in args.kv_store and 'async' not in args.kv_store:
        logging.info('Resizing training data to %d batches per machine', epoch_size)
        train = mx.io.ResizeIter(train, epoch_size)

    if args.test_io:
        tic = time.time()
        for i, batch in enumerate(train):
            for d in batch.data:
                d.wait_to_read()
            if (i + 1) % args.disp_batches == 0:
                logging.info('Batch [%d]\tSpeed: %.2f samples/sec', i,
                             args.disp_batches * args.batch_size / (time.time() - tic))
                tic = time.time()
        return

    if 'arg_params' in kwargs and 'aux_params' in kwargs:
        arg_params, aux_params = kwargs['arg_params'], kwargs['aux_params']
    else:
        sym, arg_params, aux_params = _load_model(args, kv.rank)
        if sym is not None:
            assert sym.tojson() == network.tojson()

    checkpoint = _save_model(args, kv.rank)
    devs = mx.cpu() if args.gpus is None or args.gpus == "" else [
        mx.gpu(int(i)) for i in args.gpus.split(',')]
    lr, lr_scheduler = _get_lr_scheduler(args, kv)
    model = mx.mod.Module(context=devs, symbol=network)

    optimizer_params = {'learning_rate': lr, 'wd': args.wd, 'lr_scheduler': lr_scheduler,
                        'multi_precision': True}
    if args.optimizer in {'sgd', 'dcasgd', 'nag', 'signum', 'lbsgd'}:
        optimizer_params['momentum'] = args.mom
    monitor = mx.mon.Monitor(args.monitor, pattern=".*") if args.monitor > 0 else None

    initializers = {
        'xavier': lambda: mx.init.Xavier(), 'msra': lambda: mx.init.MSRAPrelu(),
        'orthogonal': lambda: mx.init.Orthogonal(), 'normal': lambda: mx.init.Normal(),
        'uniform': lambda: mx.init.Uniform(), 'one': lambda: mx.init.One(),
        'zero': lambda: mx.init.Zero(),
    }
    if args.initializer == 'default':
        if args.network == 'alexnet':
            initializer = mx.init.Normal()
        elif args.network and 'vgg' in args.network:
            initializer = mx.init.Xavier()
        else:
            initializer = mx.init.Xavier(rnd_type='gaussian', factor_type="in", magnitude=2)
    else:
        initializer = initializers[args.initializer]()

    eval_metrics = ['accuracy']
    if args.top_k > 0:
        eval_metrics.append(mx.metric.create('top_k_accuracy', top_k=args.top_k))
    if args.loss:
        if 'softmax_output' in network.list_outputs():
            for loss in (l.strip() for l in args.loss.split(',')):
                loss = 'nll_loss' if loss == 'nll' else loss
                if loss in ('ce', 'nll_loss'):
                    eval_metrics.append(mx.metric.create(loss))
                else:
                    logging.warning('%s is not a loss this example reports', loss)
        else:
            logging.warning("The output is not softmax_output: --loss is ignored")

    batch_end_callbacks = [mx.callback.Speedometer(args.batch_size, args.disp_batches)]
    if 'batch_end_callback' in kwargs:
        cbs = kwargs['batch_end_callback']
        batch_end_callbacks += cbs if isinstance(cbs, list) else [cbs]

    model.fit(train,
              begin_epoch=args.load_epoch if args.load_epoch else 0,
              num_epoch=args.num_epochs,
              eval_data=val,
              eval_metric=eval_metrics,
              kvstore=kv,
              optimizer=args.optimizer,
              optimizer_params=optimizer_params,
              initializer=initializer,
              arg_params=arg_params,
              aux_params=aux_params,
              batch_end_callback=batch_end_callbacks,
              epoch_end_callback=checkpoint,
              allow_missing=True,
              monitor=monitor)
