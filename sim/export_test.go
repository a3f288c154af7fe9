package sim

import "regexp"

// IsCosmeticVariant reports whether command is one of CosmeticVariant's.
func IsCosmeticVariant(command string) bool {
	return cosmeticRE.MatchString(command)
}

var cosmeticRE = regexp.MustCompile(`^echo +("done"|'done'|done)( # check)?;?$`)
