package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
)

// How the commands read their command lines (in a newFlagSet, main.go): flags only, or flags
// among positional arguments, and, for the client commands, the connection flags and a job's
// handle.

// noArgs parses args into fs (a newFlagSet) and refuses any positional argument: the command
// takes flags only.
func noArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// parseInterspersed parses flags before and after positional arguments ("approve <handle>
// --comment x"), which flag.Parse alone stops at; everything after "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// A clientCommand is a command of the MCP client (jobs …, approvals …, whoami): its flag set
// with the connection flags registered, and the parsing of its arguments: flags only
// (newClientCommand), or flags and one job's handle (newJobCommand). Each command adds its own
// flags to the set.
//
// Every client command has --json (registered here, so a new command has it too): with it, what
// the command prints on stdout is the tool's structuredContent as the server sent it (emit), and
// nothing else; messages for people go to stderr (info).
type clientCommand struct {
	*flag.FlagSet
	conn   connFlags
	asJSON bool
	stderr io.Writer
}

// jsonFlagHelp is --json's help unless a command says what it prints (jsonHelp).
const jsonFlagHelp = "print the tool's structured result as JSON, unchanged (for scripts); messages go to stderr"

func newClientCommand(name, summary string, stderr io.Writer) *clientCommand {
	return clientCommandOf(name, name, summary, stderr)
}

// newJobCommand is a command about one job, "jobgate <name> <handle>": the handle, or the job's
// ID (the server resolves it for the caller, as it does a handle).
func newJobCommand(name, summary string, stderr io.Writer) *clientCommand {
	return clientCommandOf(name+" <handle>", name, summary, stderr)
}

// clientCommandOf: usage names the command in its usage line, name in its messages.
func clientCommandOf(usage, name, summary string, stderr io.Writer) *clientCommand {
	c := &clientCommand{FlagSet: newFlagSet(usage, summary, stderr), stderr: stderr}
	c.conn.register(c.FlagSet, name)
	c.BoolVar(&c.asJSON, "json", false, jsonFlagHelp)
	return c
}

// jsonHelp says what --json prints for this command.
func (c *clientCommand) jsonHelp(help string) { c.Lookup("json").Usage = help }

// emit prints one tool result: with --json the structuredContent as sent (indented, key order
// kept), else print's rendering for people.
func (c *clientCommand) emit(stdout io.Writer, raw json.RawMessage, print func()) error {
	if c.asJSON {
		return printJSON(stdout, raw)
	}
	print()
	return nil
}

// info is where a command's words for people go: stdout, or stderr under --json (stdout then
// holds JSON only).
func (c *clientCommand) info(stdout io.Writer) io.Writer {
	if c.asJSON {
		return c.stderr
	}
	return stdout
}

// connect parses args (flags only) and connects.
func (c *clientCommand) connect(args []string) (*client, error) {
	if err := noArgs(c.FlagSet, args); err != nil {
		return nil, err
	}
	return c.conn.connect()
}

// handle parses args (flags may follow the handle) and returns the one positional handle.
func (c *clientCommand) handle(args []string) (string, error) {
	pos, err := parseInterspersed(c.FlagSet, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
		c.Usage()
		return "", fmt.Errorf("%s: want exactly one handle, got %d arguments", c.conn.cmd, len(pos))
	}
	return strings.TrimSpace(pos[0]), nil
}

// connectJob is handle, then the connection, for the job commands with nothing of their own to
// check in between.
func (c *clientCommand) connectJob(args []string) (string, *client, error) {
	h, err := c.handle(args)
	if err != nil {
		return "", nil, err
	}
	cl, err := c.conn.connect()
	return h, cl, err
}

// printJobRead runs a job command that reads one result about the job (jobs get, jobs describe)
// and prints it: with --json (jsonHelp says which result) as the server sent it, else rendered
// by the print that read returns. The flag, the connection and the choice were each command's.
func (c *clientCommand) printJobRead(args []string, stdout io.Writer, jsonHelp string,
	read func(ctx context.Context, cl *client, h string) (raw json.RawMessage, print func(), err error)) error {
	c.jsonHelp(jsonHelp)
	h, cl, err := c.connectJob(args)
	if err != nil {
		return err
	}
	defer cl.Close()
	raw, print, err := read(context.Background(), cl, h)
	if err != nil {
		return err
	}
	return c.emit(stdout, raw, print)
}
