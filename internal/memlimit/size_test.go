package memlimit

import "testing"

func TestParseSize(t *testing.T) {
	const base = 1 << 30
	tests := []struct {
		in   string
		want uint64
	}{
		{"0", 0},
		{"268435456", 268435456},
		{" 4096 ", 4096},
		{"100B", 100},
		{"1K", 1024},
		{"1k", 1024},
		{"1Ki", 1024},
		{"1KiB", 1024},
		{"1KB", 1000},
		{"512M", 512 << 20},
		{"512m", 512 << 20},
		{"512Mi", 512 << 20},
		{"256MB", 256e6},
		{"256mb", 256e6},
		{"256 MB", 256e6},
		{"1GiB", 1 << 30},
		{"2G", 2 << 30},
		{"2GB", 2e9},
		{"1TiB", 1 << 40},
		{"1TB", 1e12},
		{"1.5G", 3 << 29},
		{"0.5KB", 500},
		{"75%", base / 4 * 3},
		{"100%", base},
		{"12.5%", base / 8},
		{"0%", 0},
		{"18446744073709551615", 1<<64 - 1},
		{"16777215T", 16777215 << 40},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in, base)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseSizeErrors(t *testing.T) {
	for _, in := range []string{
		"", " ", "M", "-1", "+5", "1..5G", ".", "12XB", "1 G B", "1e9",
		"101%", "50 %%", "18446744073709551616", "16777216T", "20000000000TB",
	} {
		if got, err := ParseSize(in, 1<<30); err == nil {
			t.Errorf("ParseSize(%q) = %d, want error", in, got)
		}
	}
	if got, err := ParseSize("75%", 0); err == nil {
		t.Errorf("ParseSize(75%%, base 0) = %d, want error", got)
	}
}
