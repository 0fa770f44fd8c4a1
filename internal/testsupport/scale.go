package testsupport

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
)

// ScaleEnv is the environment variable that stretches every deadline; see
// Scale.
const ScaleEnv = "HETFLOW_TEST_TIMEOUT_SCALE"

var (
	factorOnce sync.Once
	factorVal  float64
	factorErr  error
)

// Factor returns the factor Scale multiplies deadlines by: the value of
// HETFLOW_TEST_TIMEOUT_SCALE if set, else 1 (2 under -race: defaultFactor). It
// panics on a value that is not a positive number, so a typo does not
// pass unnoticed. The variable is read once per test binary.
func Factor() float64 {
	factorOnce.Do(func() { factorVal, factorErr = parseFactor(os.Getenv(ScaleEnv)) })
	if factorErr != nil {
		panic(factorErr)
	}
	return factorVal
}

func parseFactor(v string) (float64, error) {
	if v == "" {
		return defaultFactor, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > 1000 {
		return 0, fmt.Errorf("testsupport: %s=%q: want a positive number up to 1000", ScaleEnv, v)
	}
	return f, nil
}

// Scale returns the nominal deadline d stretched by Factor: the one place
// where tests' deadlines adapt to a slow or loaded machine.
func Scale(d time.Duration) time.Duration { return scaleBy(d, Factor()) }

func scaleBy(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * f)
}
