package kernel

import (
	"fmt"

	"github.com/ebitengine/purego"
)

// Function variables bound to the C ABI (kernel/include/idunno_kernel.h) by register.
var (
	idkStatusStr      func(s int32) string
	idkPlanCreate     func(out *uintptr, threads int32) int32
	idkPlanDestroy    func(p uintptr)
	idkPlanError      func(p uintptr) string
	idkPlanAddTensor  func(p uintptr, dtype, ndims int32, dims *int64, data uintptr, nbytes int64, out *int32) int32
	idkPlanAddOp      func(p uintptr, kind, nin int32, in *int32, nout int32, out *int32, ni int32, ia *int64, nf int32, fa *float32) int32
	idkPlanAddPostOp  func(p uintptr, kind, alg int32, alpha, beta float32, tensor int32) int32
	idkPlanSetIO      func(p uintptr, nin int32, in *int32, nout int32, out *int32) int32
	idkPlanCompile    func(p uintptr) int32
	idkPlanRun        func(p uintptr, in *uintptr, out *uintptr) int32
	idkPlanArenaBytes func(p uintptr) int64
	idkPlanLastRunNs  func(p uintptr) int64
	idkPlanSteps      func(p uintptr) int32
	idkPlanInPlace    func(p uintptr) int32
	idkThreadRelease  func()
	idkPeakGflops     func(threads int32, seconds float64) float64
	idkNoop           func(x int32) int32
	idkFmaRun         func(threads int32, iters int64) float64
	idkInt8Run        func(threads int32, iters int64) float64
	idkInt8AMXRun     func(threads int32, iters int64) float64
	idkPlanSetPrec    func(p uintptr, dtype int32) int32
	idkPlanShareW     func(p, donor uintptr) int32
	idkPlanConstBytes func(p uintptr, borrowed int32) int64
	idkBF16Supported  func() int32
	idkPeakBF16       func(threads int32, seconds float64) float64

	idkTrainSetRole     func(p uintptr, tid, role int32) int32
	idkTrainCompile     func(p uintptr, input, logits int32) int32
	idkTrainSizes       func(p uintptr, nparams, nstate, nbstats *int64) int32
	idkTrainGet         func(p uintptr, which int32, dst *float32, n int64) int32
	idkTrainSet         func(p uintptr, which int32, src *float32, n int64) int32
	idkTrainRun         func(p uintptr, x *float32, labels *int64, scale float32, seed uint64, loss *float64, correct *int64) int32
	idkTrainApplyBStats func(p uintptr, bstats *float32, n int64) int32
	idkTrainOptimize    func(p uintptr, kind, flags int32, lr, momentum, beta1, beta2, eps, wd float64, step int64) int32
)

func register(h uintptr) (err error) {
	defer func() {
		// purego panics when a symbol is missing: report it as a load error.
		if r := recover(); r != nil {
			err = fmt.Errorf("binding: %v (library older than the Go code? rebuild with make)", r)
		}
	}()
	purego.RegisterLibFunc(&idkStatusStr, h, "idk_status_str")
	purego.RegisterLibFunc(&idkPlanCreate, h, "idk_plan_create")
	purego.RegisterLibFunc(&idkPlanDestroy, h, "idk_plan_destroy")
	purego.RegisterLibFunc(&idkPlanError, h, "idk_plan_error")
	purego.RegisterLibFunc(&idkPlanAddTensor, h, "idk_plan_add_tensor")
	purego.RegisterLibFunc(&idkPlanAddOp, h, "idk_plan_add_op")
	purego.RegisterLibFunc(&idkPlanAddPostOp, h, "idk_plan_add_post_op")
	purego.RegisterLibFunc(&idkPlanSetIO, h, "idk_plan_set_io")
	purego.RegisterLibFunc(&idkPlanCompile, h, "idk_plan_compile")
	purego.RegisterLibFunc(&idkPlanRun, h, "idk_plan_run")
	purego.RegisterLibFunc(&idkPlanArenaBytes, h, "idk_plan_arena_bytes")
	purego.RegisterLibFunc(&idkPlanLastRunNs, h, "idk_plan_last_run_ns")
	purego.RegisterLibFunc(&idkPlanSteps, h, "idk_plan_steps")
	purego.RegisterLibFunc(&idkPlanInPlace, h, "idk_plan_inputs_in_place")
	purego.RegisterLibFunc(&idkThreadRelease, h, "idk_thread_release")
	purego.RegisterLibFunc(&idkPeakGflops, h, "idk_peak_gflops")
	purego.RegisterLibFunc(&idkNoop, h, "idk_noop")
	purego.RegisterLibFunc(&idkFmaRun, h, "idk_fma_run")
	purego.RegisterLibFunc(&idkInt8Run, h, "idk_int8_run")
	purego.RegisterLibFunc(&idkInt8AMXRun, h, "idk_int8_amx_run")
	purego.RegisterLibFunc(&idkPlanSetPrec, h, "idk_plan_set_precision")
	purego.RegisterLibFunc(&idkPlanShareW, h, "idk_plan_share_weights")
	purego.RegisterLibFunc(&idkPlanConstBytes, h, "idk_plan_const_bytes")
	purego.RegisterLibFunc(&idkBF16Supported, h, "idk_bf16_supported")
	purego.RegisterLibFunc(&idkPeakBF16, h, "idk_peak_bf16_gflops")
	purego.RegisterLibFunc(&idkTrainSetRole, h, "idk_train_set_role")
	purego.RegisterLibFunc(&idkTrainCompile, h, "idk_train_compile")
	purego.RegisterLibFunc(&idkTrainSizes, h, "idk_train_sizes")
	purego.RegisterLibFunc(&idkTrainGet, h, "idk_train_get")
	purego.RegisterLibFunc(&idkTrainSet, h, "idk_train_set")
	purego.RegisterLibFunc(&idkTrainRun, h, "idk_train_run")
	purego.RegisterLibFunc(&idkTrainApplyBStats, h, "idk_train_apply_batch_stats")
	purego.RegisterLibFunc(&idkTrainOptimize, h, "idk_train_optimize")
	return nil
}
