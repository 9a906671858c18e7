package trainer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// WriteCurve draws reward and success rate per step (train and val) from a
// metrics.jsonl file as an SVG image.
func WriteCurve(metricsPath, svgPath string) error {
	f, err := os.Open(metricsPath)
	if err != nil {
		return fmt.Errorf("curve: %w", err)
	}
	defer f.Close()
	var train, val []StepMetrics
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m StepMetrics
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		if m.Mode == "val" {
			val = append(val, m)
		} else {
			train = append(train, m)
		}
	}
	maxStep := 1
	for _, m := range append(append([]StepMetrics{}, train...), val...) {
		maxStep = max(maxStep, m.Step)
	}
	const W, H, pad = 720, 360, 50
	x := func(step int) float64 { return pad + float64(step)/float64(maxStep)*(W-2*pad) }
	y := func(v float64) float64 { return H - pad - min(max(v, 0), 1)*(H-2*pad) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="20" font-size="14">agl training: reward and success rate per step</text>`+"\n", pad)
	for i := 0; i <= 4; i++ {
		v := float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.2f</text>`+"\n", pad, W-pad, y(v), y(v), pad-5, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">step (of %d)</text>`+"\n", W/2, H-15, maxStep)
	series := []struct {
		name, color, dash string
		pts               []StepMetrics
		val               func(StepMetrics) float64
	}{
		{"train reward", "#1f77b4", "", train, func(m StepMetrics) float64 { return m.RewardMean }},
		{"train success", "#1f77b4", "4 3", train, func(m StepMetrics) float64 { return m.SuccessRate }},
		{"val reward", "#d62728", "", val, func(m StepMetrics) float64 { return m.RewardMean }},
		{"val success", "#d62728", "4 3", val, func(m StepMetrics) float64 { return m.SuccessRate }},
	}
	for i, s := range series {
		var pts []string
		for _, m := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(m.Step), y(s.val(m))))
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" stroke-dasharray="%s" points="%s"/>`+"\n", s.color, s.dash, strings.Join(pts, " "))
		}
		ly := 40 + 16*i
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2" stroke-dasharray="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			W-pad-150, W-pad-125, ly, ly, s.color, s.dash, W-pad-120, ly+4, s.name)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(svgPath, []byte(b.String()), 0o644)
}
