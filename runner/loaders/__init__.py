"""Three loaders behind one contract, so the training loop never knows which one feeds it.

A loader yields `(images, labels)` already on the training device: images float NCHW, labels
int64 N. A *train* epoch is exactly `steps_per_epoch` full batches on every rank (equal step
counts keep DDP's collectives in lock-step; fixed shapes keep BatchNorm and torch.compile
happy); an *eval* epoch covers this rank's shard exactly once (partial batches included).
"""
