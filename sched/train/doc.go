// Package train runs training: seeded epoch orders cut into steps and shards, the kernel's
// training plans as gradient calculators, learning-rate schedules, checkpoints and
// evaluation, for `idunno train local` and the cluster's training jobs alike.
//
// A step's global batch is cut into a fixed number of shards (Plan.Shards). Each shard's
// gradient is computed by a training plan (kernel.Trainer) with the gradient scale
// 1/global batch, the shard gradients are summed in shard order, and one optimizer step is
// applied: so the weights after every step depend only on the model, the data, the
// hyperparameters and the seed (and the kernel thread count, see docs/ARCHITECTURE.md),
// never on which machine computed which shard.
package train
