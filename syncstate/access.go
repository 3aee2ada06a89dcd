package syncstate

import "strconv"

// Access is how an op uses an operand, as it declares it to Op: a Read
// waits for the operand's writer, a Write also for its readers.
type Access uint8

const (
	Read      Access = 1
	Write     Access = 2
	ReadWrite Access = Read | Write
)

func (a Access) String() string {
	switch a {
	case Read:
		return "read"
	case Write:
		return "write"
	case ReadWrite:
		return "read-write"
	}
	return "Access(" + strconv.Itoa(int(a)) + ")"
}

// Writes reports whether the access includes a write.
func (a Access) Writes() bool { return a&Write != 0 }

// Use adds an operand the op uses as a says: Read, Write, or both.
func (o *Op) Use(s *State, a Access) {
	if a&Read != 0 {
		o.Read(s)
	}
	if a&Write != 0 {
		o.Write(s)
	}
}
