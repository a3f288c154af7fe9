package tools

import (
	"hash/maphash"

	"github.com/phasegate/phasegate/internal/lru"
)

// digest stands for a text the progress rule compares, without holding
// it: a per-process seeded 64-bit hash and the length (two texts that
// collide must also have one length). Two texts with equal digests are
// taken to be equal.
type digest struct {
	hash uint64
	size uint32
}

var digestSeed = maphash.MakeSeed()

func digestOf(s string) digest { return digest{maphash.String(digestSeed, s), uint32(len(s))} }

// digestCacheBytes bounds each of the caches below: about 40,000 entries
// of 100 bytes, bookkeeping included.
const digestCacheBytes = 4 << 20

// The forms of calls and the normalised results, by what they were
// computed from, across requests: an agent sends its whole turn again
// with every request, so each call's form and each result's reading is
// computed once, on the request that brought it, and looked up after.
// They hold digests only, never argument or result text. Safe for
// concurrent use.
var (
	formDigests   = newDigestCache[digest]()
	resultDigests = newDigestCache[reading]()
)

func newDigestCache[V any]() *lru.Cache[digest, V] {
	return lru.New(lru.Options[digest, V]{
		MaxBytes: digestCacheBytes,
		Shards:   16,
		Hash:     func(k digest) uint64 { return k.hash },
	})
}

// formKey is the cache key of a call's form: its project, tool, the
// schema its strings are read by, and its arguments as sent.
func formKey(projectID, name string, schema uint64, arguments string) digest {
	var h maphash.Hash
	h.SetSeed(digestSeed)
	h.WriteString(projectID)
	h.WriteByte(0)
	h.WriteString(name)
	h.WriteByte(0)
	var b [8]byte
	for i := range b {
		b[i] = byte(schema >> (8 * i))
	}
	h.Write(b[:])
	h.WriteString(arguments)
	return digest{h.Sum64(), uint32(len(arguments))}
}

// reading is how the progress rule reads a result: the digest of
// NormaliseResult's text, the hash of its frame (silentFrame), and
// whether it is silent. read marks a reading made (the zero reading is
// none).
type reading struct {
	norm         digest
	frame        uint64
	silent, read bool
}

// readResult reads result, from the cache when it was read before.
func readResult(result string) reading {
	k := digestOf(result)
	if r, ok := resultDigests.Get(k); ok {
		return r
	}
	norm := NormaliseResult(result)
	frame, silent := silentFrame(norm)
	r := reading{norm: digestOf(norm), frame: digestOf(frame).hash, silent: silent, read: true}
	resultDigests.Put(k, r)
	return r
}
