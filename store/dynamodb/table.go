package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// CreateTable creates the table when it is absent: partition key "pk"
// (binary), no sort key, on-demand capacity (PAY_PER_REQUEST), and Time
// to Live on [TTLAttribute]. It waits until the table is active. A table
// that exists is left as it is, apart from enabling TTL when it is off.
// It is what `retrysafe migrate --store dynamodb://TABLE` runs.
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) error {
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeB}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("retrysafe/dynamodb: create table %s: %w", table, translate("migrate", err))
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = 2 * time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 5*time.Minute); err != nil {
		return fmt.Errorf("retrysafe/dynamodb: wait for table %s: %w", table, translate("migrate", err))
	}
	ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if unknownOperation(err) {
		return nil // an emulator without Time to Live (dynalite): expiry on read still holds
	}
	if err != nil {
		return fmt.Errorf("retrysafe/dynamodb: describe time to live of %s: %w", table, translate("migrate", err))
	}
	if d := ttl.TimeToLiveDescription; d != nil && (d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		if aws.ToString(d.AttributeName) != TTLAttribute {
			return fmt.Errorf("retrysafe/dynamodb: table %s has Time to Live on attribute %q; the store needs %q", table, aws.ToString(d.AttributeName), TTLAttribute)
		}
		return nil
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(TTLAttribute), Enabled: aws.Bool(true)},
	})
	if unknownOperation(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("retrysafe/dynamodb: enable time to live on %s: %w", table, translate("migrate", err))
	}
	return nil
}

// unknownOperation reports whether err says the server does not know the
// operation, as dynalite answers the Time to Live calls.
func unknownOperation(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "UnknownOperationException"
}
