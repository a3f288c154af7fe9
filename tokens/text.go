package tokens

// Count returns the tokens of text as model's encoding counts it, with no
// message framing and no learned ratio: what a model generated, for the
// usage estimate of an answer closed before the upstream reported it. It
// is not cached, since generated text rarely comes again.
func (c *Counter) Count(model, text string) int {
	return c.countText(c.models.resolve(model).enc, text)
}
