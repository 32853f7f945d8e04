package postgres

import (
	"net/url"
	"regexp"
	"strings"
)

// redacted replaces a password in Redact's output.
const redacted = "xxxxx"

// Redact returns dsn with any password replaced, for logs and error
// messages. It handles URLs (postgres://user:pw@host/db?password=pw) and
// key=value strings (host=h password='p w'); a string it cannot parse as
// either has every possible password span replaced, erring towards hiding
// too much.
func Redact(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return redactURL(dsn)
	}
	return keywordPassword().ReplaceAllString(dsn, "${1}"+redacted)
}

func redactURL(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		// Unparsable (a multi-host URL, a stray '%'): hide everything
		// between the scheme and the last '@', and any password parameter.
		if at := strings.LastIndexByte(dsn, '@'); at >= 0 {
			scheme := strings.Index(dsn, "://") + len("://")
			if at > scheme {
				dsn = dsn[:scheme] + redacted + dsn[at:]
			}
		}
		return queryPassword().ReplaceAllString(dsn, "${1}"+redacted)
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), redacted)
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", redacted)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// keywordPassword matches the value of a password keyword in a key=value
// string: a quoted value (with backslash escapes) or a bare word.
func keywordPassword() *regexp.Regexp {
	return regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s]*)`)
}

// queryPassword matches a password query parameter of a URL.
func queryPassword() *regexp.Regexp {
	return regexp.MustCompile(`(?i)([?&]password=)[^&]*`)
}
