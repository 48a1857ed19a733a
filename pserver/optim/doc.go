// Package optim holds the parameter servers' optimizers: SGD, momentum
// (classical and Nesterov), Adam and Adagrad, each a deterministic update
// of one entry (a dense block or an embedding row) from its gradient:
//
//	c, err := optim.New(spec.GetOptimizer())       // defaults applied; ErrBadSpec
//	h := c.Schedule(t, lrScale)                    // lr_t = lr·lrScale/(1+lr_decay·t), T = t+1
//	ok, amax := c.Apply(params, state, lo, grad, h, optim.Store)
//
// Apply updates params[lo:lo+len(grad)] and every state[k] over the same
// range (state: one []float32 per StateSlots name, as long as params) and
// depends on nothing else: the same inputs give the same float32 bits
// anywhere, which is what a replica applying the primary's gradients
// needs. Check mode computes without storing and reports whether every
// result is finite in float32; UpdateBound gives a cheap bound that lets a
// caller skip that dry run when it is far below the float32 range
// (SafeBound). CheckState vets restored values, state and update counts.
//
// An Optimizer holds only hyperparameters and is safe for concurrent use;
// calls on disjoint ranges of one entry may run at once. The caller
// (pserver's Slot) owns the buffers, the update counts and all-or-nothing
// commits.
//
// Sources:
//   - SGD: Robbins & Monro 1951; Bottou 2010, "Large-scale machine learning
//     with stochastic gradient descent".
//   - Momentum: Polyak 1964; Sutskever, Martens, Dahl & Hinton 2013, "On
//     the importance of initialization and momentum in deep learning"
//     (PyTorch's SGD form; Nesterov as there).
//   - Adam: Kingma & Ba 2015, "Adam: A method for stochastic
//     optimization", Algorithm 1, with bias correction.
//   - Adagrad: Duchi, Hazan & Singer 2011, "Adaptive subgradient methods
//     for online learning and stochastic optimization" (diagonal form).
//   - L2 weight decay as g += wd·w; the learning rate decay lr/(1+d·t).
package optim
