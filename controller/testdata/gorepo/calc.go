package calc

func Add(a, b int) int { return a - b }

func Mul(a, b int) int { return a * b }
