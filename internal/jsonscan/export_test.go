package jsonscan

// Key returns the current key's body as written between its quotes.
func (k *Keys) Key() []byte { return k.key }

// HasKey reports whether data has a key named name (see KeyIs; name in
// lower case) at any depth.
func HasKey(data []byte, name string) bool {
	for k := Scan(data); k.Next(); {
		if k.Is(name) {
			return true
		}
	}
	return false
}
