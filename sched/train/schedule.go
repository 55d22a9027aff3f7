package train

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Schedule is a learning-rate schedule: a main rule (constant, step decay or cosine
// annealing) after an optional linear warm-up.
type Schedule struct {
	Kind       string  `json:"kind"`                  // "constant", "step" or "cosine"
	StepEpochs int     `json:"step_epochs,omitempty"` // step: decay every StepEpochs epochs
	Gamma      float64 `json:"gamma,omitempty"`       // step: the decay factor
	MinLR      float64 `json:"min_lr,omitempty"`      // cosine: the final learning rate
	Warmup     int     `json:"warmup,omitempty"`      // steps of linear warm-up from lr/Warmup to lr
}

// ParseSchedule reads "constant", "step:EPOCHS:GAMMA", "cosine" or "cosine:MIN_LR".
func ParseSchedule(s string, warmup int) (Schedule, error) {
	parts := strings.Split(s, ":")
	sc := Schedule{Kind: parts[0], Warmup: warmup}
	bad := func() (Schedule, error) {
		return Schedule{}, fmt.Errorf("train: schedule %q: want constant, step:EPOCHS:GAMMA or cosine[:MIN_LR]", s)
	}
	switch parts[0] {
	case "constant", "":
		if len(parts) != 1 {
			return bad()
		}
		sc.Kind = "constant"
	case "step":
		if len(parts) != 3 {
			return bad()
		}
		n, err1 := strconv.Atoi(parts[1])
		g, err2 := strconv.ParseFloat(parts[2], 64)
		if err1 != nil || err2 != nil || n < 1 || !(g > 0 && g <= 1) {
			return bad()
		}
		sc.StepEpochs, sc.Gamma = n, g
	case "cosine":
		if len(parts) > 2 {
			return bad()
		}
		if len(parts) == 2 {
			v, err := strconv.ParseFloat(parts[1], 64)
			if err != nil || v < 0 {
				return bad()
			}
			sc.MinLR = v
		}
	default:
		return bad()
	}
	if warmup < 0 {
		return Schedule{}, fmt.Errorf("train: warm-up of %d steps", warmup)
	}
	return sc, nil
}

// LR is the learning rate of step (counted from 0) in a run of total steps with
// stepsPerEpoch steps an epoch, for base rate lr.
func (sc Schedule) LR(lr float64, step, stepsPerEpoch, total int) float64 {
	v := lr
	switch sc.Kind {
	case "step":
		if stepsPerEpoch > 0 && sc.StepEpochs > 0 {
			v = lr * math.Pow(sc.Gamma, float64(step/stepsPerEpoch/sc.StepEpochs))
		}
	case "cosine":
		if total > 1 {
			v = sc.MinLR + (lr-sc.MinLR)*(1+math.Cos(math.Pi*float64(step)/float64(total)))/2
		}
	}
	if sc.Warmup > 0 && step < sc.Warmup {
		v *= float64(step+1) / float64(sc.Warmup)
	}
	return v
}
